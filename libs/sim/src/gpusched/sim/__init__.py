"""gpusched.sim — skeleton until the scheduling-core issue lands."""
