"""The pure core: no kopf, no kubernetes client, no aiohttp, no torch."""
