// Tables of this domain are added here by its issue.
export {};
