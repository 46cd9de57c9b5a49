"""The standard operator set (computes only; schedules live with the backends)."""
