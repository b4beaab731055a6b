"""Who talks to whom: graphs (:mod:`.topology`, a registry of named topologies and their
properties), mixing matrices and their sparse products (:mod:`.mixing`), and the tick engine's
links with the transfer-learning peer rule (:mod:`.peers`)."""
