"""RocketMQ-compatible brokers, name server and client in Python."""
