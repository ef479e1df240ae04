"""The pytest glue: hooks and options, the session, the torchrun and xdist plugins, autoload, timeouts."""
