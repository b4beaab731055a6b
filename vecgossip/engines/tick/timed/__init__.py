"""The tick engine in virtual seconds (clock.enabled, issues 48 and 55): windows of
``clock.resolution`` seconds (:mod:`.windows`), the timed messages (:mod:`.transport`) and the
generic mechanisms on them: payloads that are parameter subsets (:mod:`.parts`), an inbox of the
latest message per link (:mod:`.latest`), a request and its reply (:mod:`.pairs`)."""
