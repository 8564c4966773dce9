"""What keeps the rest honest while this dispatcher leads (see ``services.dispatcher``)."""
