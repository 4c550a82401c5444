"""The transport's codec seam: a connection speaks whatever format its codec does.

A tiny line-delimited JSON codec (a stand-in for a RocketMQ-remoting codec) serves the
same dispatcher and handlers as pymq's frames, with no change to either.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pymq.errors import RemoteProtocolError
from pymq.protocol.command import Buffer, Command
from pymq.transport import Channel, Dispatcher, RpcClient, RpcServer

ECHO = 1


class JsonLinesDecoder:
    def __init__(self) -> None:
        self.buf = b""

    @property
    def buffered(self) -> int:
        return len(self.buf)

    def feed(self, data: bytes) -> list[Command]:
        self.buf += bytes(data)
        *lines, self.buf = self.buf.split(b"\n")
        out = []
        for line in lines:
            try:
                d = json.loads(line)
            except ValueError as exc:
                raise RemoteProtocolError(str(exc)) from exc
            out.append(Command(d["code"], d["opaque"], d["flags"], d["remark"], d["ext"], d["body"].encode()))
        return out


class JsonLinesCodec:
    def __init__(self) -> None:
        self.encoded = 0

    def decoder(self) -> JsonLinesDecoder:
        return JsonLinesDecoder()

    def encode(self, cmd: Command) -> Sequence[Buffer]:
        self.encoded += 1
        d = {
            "code": cmd.code,
            "opaque": cmd.opaque,
            "flags": cmd.flags,
            "remark": cmd.remark,
            "ext": cmd.ext,
            "body": cmd.body_bytes().decode(),
        }
        return [json.dumps(d).encode() + b"\n"]


def echo(cmd: Command, channel: Channel) -> Command:
    return cmd.response(ext={**cmd.ext, "peer": channel.remote_addr != ""}, body=cmd.body)


async def test_same_handlers_over_another_codec() -> None:
    server_codec, client_codec = JsonLinesCodec(), JsonLinesCodec()
    server = RpcServer(Dispatcher({ECHO: echo}), "127.0.0.1", 0, codec=server_codec)
    await server.start()
    client = RpcClient(codec=client_codec)
    try:
        resp = await client.invoke(server.address, Command.request(ECHO, {"x": 1}, b"hello"), 3.0)
        assert resp.ext == {"x": 1, "peer": True} and resp.body == b"hello"
        unknown = await client.invoke(server.address, Command.request(99), 3.0)
        assert unknown.code == 3  # REQUEST_CODE_NOT_SUPPORTED, answered through the same codec
        assert server_codec.encoded == 2 and client_codec.encoded == 2
    finally:
        await client.close()
        await server.close(grace=0.5)
