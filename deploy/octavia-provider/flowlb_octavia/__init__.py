"""flowlb as a provider driver of OpenStack Octavia.

The driver (driver.FlowlbProviderDriver, entry point ``flowlb`` of group
``octavia.api.drivers``) forwards every call to flowlb server's own
Octavia API, with Octavia's ids (flowlb's extension: an admin names the
ids of the objects it creates), and reports the statuses flowlb reaches
back to Octavia with the driver agent's own code, in the process it runs
in (inprocess.py; octavia-lib's DriverLibrary outside Octavia).
"""
