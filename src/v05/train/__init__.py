"""The single-machine trainer: config, loop, loss, policy."""
