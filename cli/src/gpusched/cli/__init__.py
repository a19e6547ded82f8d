"""gpusched.cli: the `gpusched` command (every service, the platform launcher, replays,
forecasts, SQL). The only package that imports the services."""
