"""The pooled consumer: a RabbitMQ queue's units run in a thread pool, their outcomes
flushed in batches before the deliveries they came in are acked (the worker's and the
notifier's consumer). ``pooled`` holds the consumer, ``work`` what a service plugs
in, ``stats`` what it counts; the rest are its parts."""
