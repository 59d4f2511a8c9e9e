"""The one error type the site build reports: a single line naming the file, field or page."""


class SiteBuildError(Exception):
    """Raised for any problem a reader of the build log must fix; the message is the whole story."""
