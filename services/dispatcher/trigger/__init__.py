"""From a due job to a message on a worker's queue (see ``services.dispatcher``)."""
