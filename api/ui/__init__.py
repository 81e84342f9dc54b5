"""The web console's static files (``static/``: HTML, JS, CSS), served under ``/ui`` by
`api.app`. No build step: the browser runs them as they are, reading the public JSON API."""
