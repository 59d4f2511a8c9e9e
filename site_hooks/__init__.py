"""MkDocs build hooks that test each lab, keep its measurement record fresh and render it into pages."""
