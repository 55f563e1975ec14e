"""``qonnect demo``: the whole system on one machine, driven through its scenarios.

Layout: ``template`` finds repo-template; ``procs`` starts and stops child processes in
their own process groups; ``hook`` is the post-receive hook that plays the forge's push
webhook; ``stack`` brings up Git, the simulated fleet, three leads and nine agents;
``observe`` reads what runs through each sim's Kubernetes API; ``scenarios`` are the
QONNECT/mck8s demo steps; ``view`` prints what happens; ``runner`` ties them together.
"""
