"""A vecgossip plug-in as a researcher writes one, outside the package: decentralized FedProx.
It imports only vecgossip's public names (``vecgossip.algorithms``)."""
