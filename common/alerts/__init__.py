"""Alerts: an operator's rules, the events they fire on, and the alerts they send as
deliveries through the notifier."""
