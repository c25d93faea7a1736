"""Spark adapters: the async-wait operator inside ``mapInArrow`` and Arrow iterator UDFs."""
