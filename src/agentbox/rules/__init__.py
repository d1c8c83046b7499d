"""The rules of agentbox, free of any database.

Record types (:mod:`.records`), the knobs (:mod:`.policy`), what a handler
may answer (:mod:`.answer`), and each rule that decides something (which
events a run claims, when a failure is final, who may take the lease, which
occurrences a timer owes, whether the gap allows a send, whether an approval
answer beat its deadline) as a pure function over values a backend read. A
backend applies the decision with its own SQL inside its own transaction, so
a rule lives in exactly one place and every backend follows it.
"""
