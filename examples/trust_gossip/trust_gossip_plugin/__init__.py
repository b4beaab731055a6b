"""A vecgossip plug-in as a researcher writes one, outside the package: a robust aggregation with
per-link state. It imports only vecgossip's public names (``vecgossip.algorithms``)."""
