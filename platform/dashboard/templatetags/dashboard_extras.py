from typing import Any

from django import template

register = template.Library()


@register.filter
def get(mapping: dict[str, Any], key: str) -> Any:
    """Look a key up in a dict (templates cannot subscript with a variable)."""
    return mapping.get(key, key)
