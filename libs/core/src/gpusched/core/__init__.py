"""gpusched.core — skeleton until the scheduling-core issue lands."""
