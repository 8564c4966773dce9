"""From a worker's result to the job's state and its callback (see ``services.dispatcher``)."""
