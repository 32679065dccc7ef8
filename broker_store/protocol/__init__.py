"""RocketMQ remoting protocol: codes, frames, headers, message layouts, route data. No I/O here."""
