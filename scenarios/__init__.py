"""The shipped scenario files; ``agentbox scenarios`` finds them with importlib.resources."""
