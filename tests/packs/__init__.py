"""Tool packs that must not load: the fail-fast tests start ``serve`` and a worker on them."""
