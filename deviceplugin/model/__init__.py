"""Values in, values out: topology, boot parameters, pool plan, devices, policy, answers, host settings.

No I/O and no grpc, watchdog, prometheus_client, sockets or api here (import-linter checks it).
"""
