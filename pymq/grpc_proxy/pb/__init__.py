"""Generated protobuf/gRPC modules of apache.rocketmq.v2 (see regen.sh); do not edit the *_pb2* files."""
