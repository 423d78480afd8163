"""Small Kubernetes API client and the Slurm -> Kubernetes bridge.

Modules, in the order data flows through them:

* ``settings``  - the ``[bridge]`` config section (BridgeConfig);
* ``plan``      - pure planner: Slurm NodeStates + Node objects -> steps;
* ``client``    - requests-based API client (retries, TLS, Status errors);
* ``replace``   - Cluster API / webhook / NodeReplacement requesters;
* ``lease``     - leader election on a coordination.k8s.io/v1 Lease;
* ``bridge``    - executor and loop; ``metrics`` - Prometheus metrics;
* ``standin``   - loopback stand-in for the API server (tests and demo).
"""
