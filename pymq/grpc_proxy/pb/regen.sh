#!/usr/bin/env bash
# Regenerates the committed *_pb2.py / *_pb2.pyi / *_pb2_grpc.py next to this script from the
# .proto files (needs grpcio-tools, in the test extra). The generated code refuses older runtimes than its
# generator's (grpcio, protobuf): keep pyproject.toml's floors in step when regenerating. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/../../.."
python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. \
    pymq/grpc_proxy/pb/definition.proto pymq/grpc_proxy/pb/service.proto
