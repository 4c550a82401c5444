"""RocketMQ 4.x remoting wire format (pure, no I/O).

``codes`` holds RocketMQ's request/response/language numbers, ``command`` the
RemotingCommand codec (JSON and the binary ROCKETMQ header types) with the first-frame
sniffing used to share a port with pymq's own frames, and ``message_layout`` the
MessageDecoder record layout a 4.x client parses from PULL_MESSAGE bodies.
"""
