-- Facts about the installation itself, such as its id.
CREATE TABLE gantry_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
