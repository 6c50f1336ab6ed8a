-- cairn schema 4: a task's page finds the tasks related to it without a scan,
-- however many tasks the store holds.

-- Tasks of one name, newest first: the `cairn fidelity` runs on a task (each a
-- task named cairn.fidelity, which the dashboard's task page looks up among
-- them), and a listing filtered by task name (`cairn tasks --name`). An index
-- on the id cannot find the runs by their id's start (fidelity:TASK:): on a
-- PostgreSQL database whose collation is not C, the ids that start so are not
-- one range of the index.
CREATE INDEX tasks_by_name ON tasks (name, pos);

-- The children a task spawned (ctx.spawn), in the order they were made, listed
-- on its page. Only spawned tasks have a parent, so only they are indexed.
CREATE INDEX tasks_by_parent ON tasks (parent_id, pos) WHERE parent_id IS NOT NULL;
