"""What a handoff tells people, one job per module.

record         the audit record: appended to the Service's history, announced by an Event
markdown       the plan, the gate policy and the record as markdown (approvals, artifacts)
pictures       the gates' pictures and the timeline as Prefect artifacts
timeline       the steps and the Service's ready endpoints on one time axis (and the sampler)
timeline_plot  the timeline drawn as a PNG
stepview       the steps as they happen, for a terminal (`handoff run`'s live table)
history        `handoff history`'s records: the Services' annotations merged with Prefect's runs
prefect_runs   the handoff runs Prefect knows, merged with the records by flow run id
history_view   how `handoff history` prints the records
links          a run's address in the Prefect UI
notify         the spec's notification block: an approval is waiting, a rollback happened
"""
