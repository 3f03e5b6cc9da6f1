"""The redis-server dataq starts and owns when no Redis is configured, and the commands built on it: ``dataq redis``
(the server as a service of its own) and ``dataq run`` (the whole suite in the foreground)."""
