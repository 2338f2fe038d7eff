"""What tests share: fixture factories (``factories``), repository paths (``paths``),
the peer frameworks' loaders (``peers``). Imported as ``tests.helpers.<module>``."""
