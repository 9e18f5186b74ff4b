"""The pipeline stage: faust agents that authenticate, authorize, admit and route each
request to a signed model version (pipeline/app.py), around a pure decision core
(pipeline/decide.py)."""
