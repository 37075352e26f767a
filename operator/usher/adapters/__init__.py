"""Adapters: where usher meets the world (kopf watches, the API server, Prometheus, HTTP).

They translate watch events into calls on the pure core and carry the
core's decisions out as API calls. Nothing in ``usher.core`` imports them.
"""
