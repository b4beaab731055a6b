"""vecgossip: gossip learning and decentralized FL with every node's model in one stacked tensor."""

__version__ = "0.1.0"
