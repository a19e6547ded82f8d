"""gpusched.local: real Kafka, Slurm and Kubernetes run on this machine, for development,
`gpusched up` and the tests. Nothing here is used by a service in production."""
