"""``testbed ui``: a live web view of a running testbed (issue 31).

``tail.py`` follows the run directory's files as they grow, ``model.py`` turns events and
recorder rows into the view's state and its deltas (no I/O), ``layout.py`` places the graph,
``feed.py`` ties them to one testbed, ``server.py`` serves the page (``static/``, with the JS
libraries it ships in ``static/vendor/``) and the server-sent events.
"""
