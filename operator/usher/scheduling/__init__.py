"""usher at run time: the pieces between the watches and the API writes, one job per module.

Modelled on kube-scheduler's split of ``pkg/scheduler``:

- ``eventhandling``    watch events -> cache and queue (eventhandlers.go)
- ``loop``             pop while leading, hand each pod to the cycles (scheduler.go)
- ``scheduling_cycle`` filter, score, assume, Reserve, Permit (schedule_one.go, first half)
- ``binding_cycle``    Permit wait, PreBind, Bind, PostBind as a task (schedule_one.go, second half)
- ``waiting_pods``     pods held at Permit (waiting_pods_map.go)
- ``failures``         a failed attempt: metrics, requeue, Unschedulable + FailedScheduling
- ``notready``         PreEnqueue rejections as NotReadyForScheduling (KEP-5501)
- ``podevents``        Events about pods
- ``attempts``         the last failed attempt of each pod, for `usher explain`
- ``ports``            the protocols these pieces need: the dispatcher, the metrics
- ``scheduler``        the built parts, for explain and health

Nothing here builds an adapter: ``usher.app`` (the composition root) builds
every piece and hands it its ports, so unit tests can hand them fakes.
"""
