"""The Reinforce-Ada platform's command-line client: ``python -m rada --help``."""
