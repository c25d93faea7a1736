"""Conformance: user asyncio code inside an aiospark call behaves exactly as under asyncio.run (SPEC section 4)."""
