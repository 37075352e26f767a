"""Root pytest configuration: the e2e control-plane fixtures are available to every test."""

pytest_plugins = ["e2e.pytest_plugin"]
