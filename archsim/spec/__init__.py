"""Typed descriptions (chips, memories, links, families, models) and the library that finds them."""
