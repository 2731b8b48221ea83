"""Operating Dayflow: structured logs and Prometheus metrics for the commands that drive runs."""
