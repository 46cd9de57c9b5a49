"""Graph passes and the pass manager that runs them."""
