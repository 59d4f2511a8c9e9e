"""The prefix-caching lab's views of its checked record."""
