"""The API's routes, one module per resource, each a ninja ``router`` (``api.api`` adds them)."""
