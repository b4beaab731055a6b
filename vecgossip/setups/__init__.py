"""Composition of one engine each: ``validate(cfg)`` (every option, before any work), ``build(cfg)``
(parts from the config, handed to the engine), ``summarize`` and ``write_outputs``. ``sim.run``
picks the setup named by ``engine.name``; adding an engine adds a file here."""
