VIEWS = {}
