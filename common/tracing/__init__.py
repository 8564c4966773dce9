"""W3C trace context carried with a job from submit to callback, and optional spans."""
