"""dealbroker: brokers second-hand deals between a seller and a buyer for marketplaces."""

__version__ = "0.1.0"
