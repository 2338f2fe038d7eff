"""Content-first discovery: list the files under a path, group them into checkpoints and
classify what each holds by its shape (a typed ``Scan``)."""
