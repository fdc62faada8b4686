import express from 'express';

/** Every form body svc reads (the token request on either way in, the pages' forms): 100 KB, flat fields. */
export const formBody = () => express.urlencoded({ extended: false, limit: '100kb' });
