"""The checkpoint connector (RIP-45 CheckpointConnector): source consumer-group offsets translated exactly
through a link's offset map and committed on the target. ``translation`` holds the pure rule."""
