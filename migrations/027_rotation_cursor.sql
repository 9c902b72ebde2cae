-- queue_generations.moved_upto: how far the rotation's moves have gone
-- through a closed generation, in seq order (rotate_queue). Each move
-- starts past it, so that it reads the rows it moves and not the row
-- versions the moves before it left: without it, a move of a drained
-- 10^6-row generation read every row already moved, and the moves slowed
-- from 5 ms to hundreds. NULL: from the start.
ALTER TABLE {{.schema}}.queue_generations ADD COLUMN moved_upto bigint;
